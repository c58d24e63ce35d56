enum PlaceholderTS {}
