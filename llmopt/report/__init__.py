"""Comparisons of schedules and bounds, and plots (functions take ``ax=``)."""
