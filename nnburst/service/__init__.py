"""Driver service: the app ↔ driver-process control channel and its calls."""
