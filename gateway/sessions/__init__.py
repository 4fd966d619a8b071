"""One client's session: the asyncio connection shell around the protocol core
(``connection``), the session's state and running of statements (``session``), its commands
(``commands``, ``role_commands``, ``transactions``, ``cursors``, ``copy_data``), prepared
statements and portals. Statements reach the rooms below through a StatementContext
(``gateway/tables/statement_context.py``), never the session itself. The shell runs on the
event loop; DuckDB calls go to worker threads (``Session.in_thread``)."""
