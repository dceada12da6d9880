"""Security building blocks with no broker in them (JWT tokens), shared by broker, admin, CLI and client."""
