"""The embedded development stack (Tansu broker, PostgreSQL), sample data and the demo."""
