"""REST API v1 routes (filled by each app's api package)."""
urlpatterns: list = []
