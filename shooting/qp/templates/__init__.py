"""C templates of the stage-wise QP solver (data files; `shooting.codegen.ocp_qp` renders them)."""
