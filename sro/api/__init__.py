"""Pure contracts shared by the node side and the cluster side: names, label keys, schemas. No I/O."""
