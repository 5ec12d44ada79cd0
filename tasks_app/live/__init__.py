"""The live trace: publishing committed events to channel-layer groups, and the
WebSocket consumer the console subscribes with."""
