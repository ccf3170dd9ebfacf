"""UHP side of the bridge: a resumable UHP client and the event adapter for UHP servers."""
