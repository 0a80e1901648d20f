"""Capabilities: business-level AI calls (summarize, extract, generate, chat) on top of the gateway."""
