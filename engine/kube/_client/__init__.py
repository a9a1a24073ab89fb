"""The wire client: configuration, credentials, HTTP transport, requests, watches, errors."""
