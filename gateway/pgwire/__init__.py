"""The PostgreSQL wire protocol, sans I/O: message encoding and decoding (``messages``), the
protocol's state machine (``protocol``), authentication (``auth``, ``scram``), COPY formats
(``copy_format``, ``copy_binary``), types and row encoding (``types``, ``row_encoding``), result
shapes (``results``) and PostgreSQL-style errors (``errors``). Nothing here touches a socket or
imports the rest of the gateway."""
