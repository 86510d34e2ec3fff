"""State store backends; each is imported lazily through `sessionize.state.registry`."""
