"""The cqgate gateway: PostgreSQL wire protocol, sessions, catalog and static tables."""
