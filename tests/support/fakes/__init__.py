"""In-memory stand-ins for switches, shared by the unit tests."""
