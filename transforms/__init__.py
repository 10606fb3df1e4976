"""draftsmith package."""
