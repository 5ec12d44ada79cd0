"""The console's accounts pages: members, API keys and secrets (thin views over
services, through `foundations.console_access`)."""
