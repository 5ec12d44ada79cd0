"""Accounts and tenancy: tenants, users' memberships and roles, API keys, the
tenant secrets vault and the operator's tenant quotas."""
