"""Protobuf schemas tracekit owns (XPlane, a subset of XLA HLO) and their generated bindings."""
