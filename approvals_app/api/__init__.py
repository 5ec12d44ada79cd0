"""REST API of the human loop: approvals, reconciliations, questions."""
