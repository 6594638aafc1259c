"""C templates of the real-time MHE (data files; `shooting.estimate.rt_mhe_c` renders them)."""
