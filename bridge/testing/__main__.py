"""``python -m bridge.testing``: the example task server (:mod:`bridge.testing.server`)."""

from bridge.testing.server import main

main()
