"""The session's own statements (the ones sqlglot never sees): statements split and lexed
(``lexer``, ``token_reader``) and read into typed commands (``command_syntax``,
``role_syntax``): SET, SHOW, transactions, cursors, PREPARE, COPY, roles and grants. Pure
functions of the text."""
