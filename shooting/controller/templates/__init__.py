"""C templates of the exported controller (data files; `shooting.controller.c_source` renders them)."""
