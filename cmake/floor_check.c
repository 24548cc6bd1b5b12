/* Linked with one floor's whole library and the floors below it only (CMakeLists.txt,
 * ctxpatch_floor): the link fails if any object of the floor calls into a floor above it. */
int main(void) { return 0; }
