"""Background jobs run as actors under the supervisor: fixture sync, reference sync, prematch notifications."""
