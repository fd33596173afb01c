"""KIP-848 consumer groups: model, manager, records, assignors."""
