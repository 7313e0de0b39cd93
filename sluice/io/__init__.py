"""Reading inputs: typed CSV rows with errors that name the file and line."""
