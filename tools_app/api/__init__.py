"""REST API of tool registrations (admins)."""
