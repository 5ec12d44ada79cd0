"""The reviewer's inbox: pending approvals, open questions and open
reconciliations, with the decisions a reviewer takes on them."""
