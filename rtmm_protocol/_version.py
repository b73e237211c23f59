"""Version numbers of the package and of the contract it implements."""

__version__ = "0.1.0"

#: Version of the contract (the clause set of the specification). The conformance
#: suite records, for every check, the protocol version that introduced it.
PROTOCOL_VERSION = "1.1"
