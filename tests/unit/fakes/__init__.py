"""Hand-written fakes of the ports, shared by the unit tests."""
