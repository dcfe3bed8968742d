#define _POSIX_C_SOURCE 200809L

#include "pmix_tool_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char* read_server_uri(const char* program, const char* given) {
  if (strncmp(given, "file:", 5) != 0) return strdup(given);
  FILE* f = fopen(given + 5, "r");
  if (f == NULL) {
    fprintf(stderr, "%s: cannot read the URI file %s\n", program, given + 5);
    return NULL;
  }
  char line[1024] = {0};
  if (fgets(line, sizeof line, f) == NULL) line[0] = '\0';
  fclose(f);
  line[strcspn(line, "\r\n")] = '\0';
  if (line[0] == '\0') {
    fprintf(stderr, "%s: the URI file %s is empty\n", program, given + 5);
    return NULL;
  }
  return strdup(line);
}

void print_json_string(const char* s) {
  putchar('"');
  for (; s != NULL && *s != '\0'; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}
