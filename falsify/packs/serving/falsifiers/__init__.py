"""The `serving` pack's falsifiers: engine-neutral, they reach the engine only through the `engine` fixture."""
