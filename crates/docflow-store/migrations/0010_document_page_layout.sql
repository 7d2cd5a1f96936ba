-- Where an OCR page's text is on its image: the image's size, the turn that made it upright,
-- boxes found past the page's cap and not read, and every line read with its box (four
-- corners in the image's pixels) and confidence, as JSON (docflow_store::PageLayout). NULL
-- for a page read from its text layer, and for pages stored before this column.
ALTER TABLE document_pages ADD COLUMN layout TEXT NULL;
