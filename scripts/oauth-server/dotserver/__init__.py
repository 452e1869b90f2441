"""The test project around django-oauth-toolkit: settings, URLs, the validator and the test-only views."""
