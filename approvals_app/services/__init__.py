"""Writes of the human loop: opening requests (called by the runner) and the
decisions people take on them (called by the API and the console): approving,
rejecting and responding (`decisions`), answering questions (`answers`),
resolving reconciliations."""
