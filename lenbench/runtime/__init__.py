"""Run-time plumbing shared by every stage: process settings (seeds, threads), progress lines for
plain logs, and token batching."""
