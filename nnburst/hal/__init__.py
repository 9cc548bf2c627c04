"""HAL layer: model, request and packet types, burst server and controller."""
