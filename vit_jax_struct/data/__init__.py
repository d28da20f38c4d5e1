"""Data: sources (digits, image folders, TFDS), preprocessing, grain pipelines."""
