"""What travels on the topics: validated input events, the order, the rejects payload
(:mod:`.records`), their JSON Schemas (:mod:`.schemas`) and canonical page URLs (:mod:`.urls`)."""
