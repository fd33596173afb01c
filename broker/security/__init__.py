"""Authentication (SASL: PLAIN, SCRAM, OAUTHBEARER) and authorization (ACLs)."""
