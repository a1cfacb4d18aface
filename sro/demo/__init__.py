"""`sro demo`: its command and tables (`commands`), its stages (`stages`), the partitioning stage."""
