"""C templates of the stage-wise QP solver (data files; `shooting.controller.ocp_qp` renders them)."""
