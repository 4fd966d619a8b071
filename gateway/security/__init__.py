"""Who may connect and what each role may do: roles with SCRAM verifiers, owners and
privileges, kept in the server's own catalog (``<data_dir>/catalog``) as PostgreSQL models them."""
