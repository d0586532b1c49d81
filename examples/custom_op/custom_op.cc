// Placeholder until the custom-op example lands.
int main() { return 0; }
