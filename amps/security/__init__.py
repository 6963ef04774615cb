"""Users, password hashes and entitlements (issue 12)."""
