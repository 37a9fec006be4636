"""The agent side of the contract: protocol, host process, loader."""
