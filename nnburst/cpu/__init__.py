"""The numpy CPU reference driver."""
