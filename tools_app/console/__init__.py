"""Console pages for tool registrations: readable by the tenant, edited by admins."""
