"""The lease inventory (M4): every lease of a namespace with its owner and state, and the bytes
it pins and alone keeps, sized by retention's own planner."""
