"""Cloud providers behind one protocol (`base.Provider`)."""
