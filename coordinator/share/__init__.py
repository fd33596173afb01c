"""Share groups (KIP-932) in the group coordinator: records 9-15, the group model, the share assignor and the manager of ShareGroupHeartbeat and ShareGroupDescribe."""
