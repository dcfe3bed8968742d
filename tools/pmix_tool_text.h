/* What the PMIx tools (bellows-pmix-query, bellows-pmix-control) share: reading the daemon's
 * URI as given on their command line, and writing a JSON string. */
#ifndef BELLOWS_PMIX_TOOL_TEXT_H
#define BELLOWS_PMIX_TOOL_TEXT_H

/* The URI itself, or the first line of the file a "file:" URI names; NULL after a message on
 * stderr that starts with `program`. The caller frees the result. */
char* read_server_uri(const char* program, const char* given);

/* `s` on stdout as a JSON string (quotes, backslashes and control characters escaped; NULL
 * as ""). */
void print_json_string(const char* s);

#endif
