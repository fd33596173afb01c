"""SASL authentication (KIP-43, KIP-152 framing): PLAIN and SCRAM-SHA-256/512 against salted
credentials stored in the data directory; the SaslHandshake and SaslAuthenticate APIs."""
