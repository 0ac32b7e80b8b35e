"""The web console the daemon serves: pages, the report API (`/api/v1`), and their login."""
