"""The server as a process: command line (``cli``), the listening sockets and the lifecycle
that starts and stops every part (``server``), the metrics and console HTTP server
(``metrics_http``) and ``cqgate push`` (``push_command``). The top room: it may import all
others, none imports it."""
