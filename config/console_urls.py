"""Console routes (filled by each app's console package)."""
urlpatterns: list = []
