"""Use cases of accounts, one function each: tenants, users and memberships, API
keys and their scopes, tenant secrets, the operator's quota terms."""
