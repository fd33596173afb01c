"""Share groups in the broker (KIP-932): the share coordinator's log ``__share_group_state``
(:mod:`.state_runtime`), the share partitions of this broker with their sessions, and the
ShareFetch and ShareAcknowledge APIs. The pure parts are :mod:`kcoord.share`."""
